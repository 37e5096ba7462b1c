"""`make demo`: a small inference path traced by the agent, shown in Arize Phoenix."""
