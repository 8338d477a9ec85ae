"""One module per concern: its rule ids (declared once, with default actions), its mutation, its validation."""
