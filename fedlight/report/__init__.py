"""Reports: tables and plots that compare many finished runs."""
