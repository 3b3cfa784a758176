"""The main job end to end (``make demo``): real processes and a realistic scenario."""
