"""A simulated GPU cluster driven by scenario files (format v1), on a simulated clock."""
