"""A "listing" project for the end-to-end tests: many items per page, a slow async pipeline."""
