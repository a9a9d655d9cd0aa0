const topic = args.topic
return agent("research " .. topic)
