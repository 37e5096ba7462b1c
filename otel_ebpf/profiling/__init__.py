"""CPU profiles: kernel samples -> symbolized, Python-aware stacks -> profile exporters."""
