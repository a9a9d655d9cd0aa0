return agent("research", {profile = "researcher"})
