package main


func runPlot(args []string) error   { return nil }
func runImport(args []string) error { return nil }
