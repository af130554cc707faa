"""Sinks: a job's results into a SQL database (sql_sink.py) or a RabbitMQ queue
(amqp_sink.py), read by a reader group and acknowledged only once the destination has them
for good (docs/results-readers.md). Optional: ``pip install 'scrapy-clustersync[sinks]'``."""
