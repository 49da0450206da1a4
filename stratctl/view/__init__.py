"""Presentation: live displays, tables and metrics export."""
