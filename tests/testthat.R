# processx (callr) replaces the SIGCHLD handler that parallel's mclapply()
# relies on; without this, parallel waits 10 s at exit for children it never
# sees reaped and prints "unable to terminate some child processes" (processx
# issue #236). tools/run-r-tests.R does the same.
Sys.setenv(PROCESSX_NOTIFY_OLD_SIGCHLD = "true")
library(testthat)
library(pageshare)
test_check("pageshare")
