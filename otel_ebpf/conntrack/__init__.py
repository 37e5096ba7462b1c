"""Connection table, positioned stream buffers, protocol inference."""
