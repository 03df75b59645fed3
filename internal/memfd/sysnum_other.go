//go:build !amd64 && !arm64

package memfd

const sysMemfdCreate = -1
