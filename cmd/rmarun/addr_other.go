//go:build unix && !linux

package main

// rdmaAddr finds no RDMA device: rdmamap reads Linux's sysfs.
func rdmaAddr(route string) string { return "" }
