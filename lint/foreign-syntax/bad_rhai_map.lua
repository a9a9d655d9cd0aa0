return agent("write", #{label: "draft"})
