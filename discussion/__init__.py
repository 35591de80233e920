"""Comment threads on quota and MIG requests, and the live progress fragments of their pages."""
