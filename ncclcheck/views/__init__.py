"""Views only render frozen results: rich text, JSON, the Textual app."""
