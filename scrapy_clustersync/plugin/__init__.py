"""What plugs into Scrapy: the add-on, scheduler, dupefilter, spider middleware and extensions.

They run on the reactor thread and never talk to Redis: they hand work to the node's Redis
thread (``scrapy_clustersync.node``) and read the snapshots it hands back.
"""
