library(testthat)
library(dstp)

test_check("dstp")
