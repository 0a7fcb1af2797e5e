module github.com/idkeeper/idkeeper/bench

go 1.26.0

require (
	github.com/bwmarrin/snowflake v0.3.0
	github.com/idkeeper/idkeeper v0.0.0
	github.com/sony/sonyflake v1.2.0
)

replace github.com/idkeeper/idkeeper => ../
