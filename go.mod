module github.com/wanopt/wanopt

go 1.26.0
