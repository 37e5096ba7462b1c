"""HTTP/1.x."""
