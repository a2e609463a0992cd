"""The query engine: parse → validate → plan → scan → execute.

``parse`` checks user text against a whitelist and binds it to a dataset;
``plan`` picks the grid, pushes coordinate predicates down to index ranges
and generates DuckDB SQL; ``scan`` reads the hyperslab lazily as Arrow
batches; ``execute`` runs DuckDB over the scan with limits. None of these
modules knows about gRPC, sockets or HTTP.
"""

from dstp.query.execute import PreparedQuery, QueryExecution, QuerySummary, prepare_query
from dstp.query.parse import Sampling, ValidatedQuery, validate_query
from dstp.query.plan import Hyperslab, QueryPlan, plan_query

__all__ = [
    "Hyperslab",
    "PreparedQuery",
    "QueryExecution",
    "QueryPlan",
    "QuerySummary",
    "Sampling",
    "ValidatedQuery",
    "plan_query",
    "prepare_query",
    "validate_query",
]
