// Package bench compares IdKeeper's snowflake.Generator side by side with
// github.com/bwmarrin/snowflake and github.com/sony/sonyflake. It is a separate
// module so that those test-only dependencies never enter the main module.
//
// Each benchmark reports ids/s and ceiling-fraction: the rate as a fraction of the
// generator's own ceiling (IdKeeper's default layout 1,024,000 IDs/s, bwmarrin
// 4,096,000 IDs/s, sonyflake 25,600 IDs/s). The ceilings are time-bound, so run with
// -benchtime of at least 1s:
//
//	cd bench && go test -run '^$' -bench . -benchtime 2s -count 3
//
// TestCPUTwoGoroutines saturates each generator with two goroutines for one second
// and logs the process CPU time (getrusage, user+sys) it took:
//
//	cd bench && go test -run CPU -v
package bench
