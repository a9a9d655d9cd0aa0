local draft = agnet("write a haiku")
return draft
