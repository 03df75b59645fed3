//go:build !linux

package ibv

// sysDevices finds nothing: RDMA discovery reads Linux sysfs.
func sysDevices() []SysDevice { return nil }

func rdmaDeviceForNetdev(string) string { return "" }
