"""Build helpers for the book (not part of the installed package). See tools/book.py."""
