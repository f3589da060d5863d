"""Tables, figures and the writeup, built from records."""
