"""DescribeTransactionsRequest v0: kio's (only the response needs declaring here)."""

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

__all__ = ("DescribeTransactionsRequest",)
