return host_call("send_email", {to = "x"})
