"""The unit tier: seconds, no subprocess, no redis-server (`make unit`)."""
