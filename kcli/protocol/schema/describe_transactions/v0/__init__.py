from .request import DescribeTransactionsRequest
from .response import DescribeTransactionsResponse

__all__ = (
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
)
