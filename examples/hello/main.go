// Command hello is README's first program: rank 0 puts 1000 float64 into
// rank 1's window between two fences, and rank 1 prints the last one.
//
//	make build && bin/rmarun -n 2 bin/hello
package main

import (
	"fmt"
	"log"

	"github.com/rmago/rmago/rma"
)

func main() {
	w, err := rma.Init() // rank, size and peers from the environment rmarun sets
	if err != nil {
		log.Fatal(err)
	}
	if w.Size() < 2 {
		log.Fatal("this program needs two ranks: rmarun -n 2 ./prog")
	}
	const n = 1000
	win, err := rma.Allocate[float64](w, n) // library memory, registered for RDMA
	if err != nil {
		log.Fatal(err)
	}
	src := make([]float64, n)
	for i := range src {
		src[i] = float64(i)
	}
	if err := win.Fence(0); err != nil { // opens the access epoch
		log.Fatal(err)
	}
	if w.Rank() == 0 {
		if err := win.PutSlice(src, 1); err != nil { // whole slice into rank 1 at displacement 0
			log.Fatal(err)
		}
	}
	if err := win.Fence(0); err != nil { // completes it: the put is in rank 1's window
		log.Fatal(err)
	}
	if w.Rank() == 1 {
		fmt.Println(win.Local()[n-1]) // 999: rank 1 sees src
	}
	if err := win.Free(); err != nil { // collective: every rank frees the window
		log.Fatal(err)
	}
	if err := w.Close(); err != nil { // collective too: a last barrier, then the job is left
		log.Fatal(err)
	}
}
