return agent("edit", {profile = "editor-in-chief"})
