package control

// Unmapped makes c reach rank r's words as if mapping them had failed
// (Direct returns nil), for tests of NoteSet's write through the queue
// pair.
func Unmapped(c *Region, r int) {
	var none []uint64
	c.direct[r].Store(&none)
}
