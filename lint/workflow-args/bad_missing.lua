-- summarize declares `@args text: string, max_words?: integer` (see lint/context.json).
return workflow("summarize", {})
