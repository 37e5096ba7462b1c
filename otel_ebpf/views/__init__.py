"""Views of the agent's outputs for people: flame graphs (SVG) of its profiles."""
