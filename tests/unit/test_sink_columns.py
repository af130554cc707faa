"""What a sink's table looks like, without a database: its name, its item columns' names and
kinds, how a value fits its column, and which URLs a sink takes."""

from __future__ import annotations

import pytest

from scrapy_clustersync.sinks.destination_errors import DestinationUnusable
from scrapy_clustersync.sinks.sql_columns import column_name, fit, value_kind
from scrapy_clustersync.sinks.sql_sink import engine_url, table_name


@pytest.mark.parametrize(("job", "table"), [
    ("shop", "shop"), ("Shop-2", "shop_2"), ("2026 books", "t_2026_books"), ("", "results"),
    ("x" * 80, "x" * 60),
])
def test_the_default_table_is_the_job_name_made_safe(job: str, table: str) -> None:
    assert table_name(job) == table


@pytest.mark.parametrize(("field", "column"), [
    ("title", "title"), ("Stock Count", "stock_count"), ("1st", "f_1st"), ("id", "item_id"),
    ("item", "item_item"), ("prix-€", "prix__"),
])
def test_an_item_field_gets_a_safe_column_name(field: str, column: str) -> None:
    assert column_name(field) == column


@pytest.mark.parametrize(("value", "kind"), [
    (True, "bool"), (3, "int"), (2**70, "text"), (1.5, "float"), ("a", "text"), ([1], "text"),
    ({"a": 1}, "text"), (None, "text"),
])
def test_a_column_kind_comes_from_the_first_value(value: object, kind: str) -> None:
    assert value_kind(value) == kind


@pytest.mark.parametrize(("value", "kind", "stored"), [
    ("free", "float", None), (2, "float", 2.0), (2.0, "int", 2), (2.5, "int", None),
    (True, "int", None), (1, "bool", None), (False, "bool", False), ([1, "a"], "text", '[1, "a"]'),
    ({"k": "é"}, "text", '{"k": "é"}'), (None, "int", None),
])
def test_a_value_that_does_not_fit_its_column_is_null_there(value: object, kind: str,
                                                            stored: object) -> None:
    assert fit(value, kind) == stored


@pytest.mark.parametrize(("url", "engine"), [
    ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
    ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
    ("mysql://root@h:3306/db", "mysql+pymysql://root@h:3306/db"),
    ("mariadb://root@h/db", "mysql+pymysql://root@h/db"),
    ("sqlite:///tmp/x.db", "sqlite:///tmp/x.db"),
])
def test_a_url_gets_the_driver_of_the_sinks_extra(url: str, engine: str) -> None:
    assert engine_url(url) == engine


def test_a_url_of_another_scheme_is_refused() -> None:
    with pytest.raises(DestinationUnusable, match="unsupported destination scheme 'ftp://'"):
        engine_url("ftp://host/x")
