"""Small shared helpers with no knowledge of detection: atomic file writes, progress bars, drawing boxes."""
