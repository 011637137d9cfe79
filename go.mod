module github.com/ferrydev/ferry

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/pelletier/go-toml/v2 v2.4.3 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
