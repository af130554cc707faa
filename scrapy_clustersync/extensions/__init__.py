"""Scrapy extensions of the cluster: node lifecycle (idle, finish, stop on lost state)."""
