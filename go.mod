module github.com/rmago/rmago

go 1.26.8

require (
	github.com/Mellanox/rdmamap v1.1.0
	github.com/goccy/go-json v0.12.0
	golang.org/x/exp v0.0.0-20260908205506-85c1c2202aba
)

require (
	github.com/vishvananda/netlink v1.1.0 // indirect
	github.com/vishvananda/netns v0.0.0-20191106174202-0a2b9b5464df // indirect
	golang.org/x/sys v0.0.0-20210119212857-b64e53b001e4 // indirect
)
