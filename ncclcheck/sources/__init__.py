"""Live data sources for the watch views: each poll collects (collectors) and judges (analysis), and returns a frozen state."""
