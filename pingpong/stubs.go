package main

func runOneMany(args []string) error { return nil }
func runOSU(args []string) error     { return nil }
func runPlot(args []string) error    { return nil }
func runImport(args []string) error  { return nil }
