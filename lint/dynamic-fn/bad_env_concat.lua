return _ENV["age" .. "nt"]("prompt")
