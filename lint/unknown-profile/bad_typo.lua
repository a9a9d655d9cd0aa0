return agent("research", {profile = "reseacher"})
