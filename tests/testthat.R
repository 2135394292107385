library(testthat)
library(pageshare)
test_check("pageshare")
