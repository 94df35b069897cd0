"""Records, kinds and errors shared by every stage."""
