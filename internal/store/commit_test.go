package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestGroupCommitIsolatesAFailingWrite(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = s.write(func(tx *bolt.Tx) error {
				if i%10 == 3 {
					return boom
				}
				return tx.Bucket(bucketMeta).Put([]byte(fmt.Sprint("k", i)), []byte("v"))
			})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		switch {
		case i%10 == 3 && !errors.Is(err, boom):
			t.Fatalf("write %d: want its own error, got %v", i, err)
		case i%10 != 3 && err != nil:
			t.Fatalf("write %d failed because a neighbour did: %v", i, err)
		}
		if i%10 == 3 {
			continue
		}
		if v, err := s.Meta(fmt.Sprint("k", i)); err != nil || string(v) != "v" {
			t.Fatalf("write %d not durable: %q %v", i, v, err)
		}
	}
}

func TestCloseCommitsQueuedWritesThenRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := s.PutMeta(fmt.Sprint("k", i), []byte("v")); err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("put %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutMeta("late", []byte("v")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: want ErrClosed, got %v", err)
	}
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for i := 0; i < 50; i++ {
		if v, err := s2.Meta(fmt.Sprint("k", i)); err != nil || string(v) != "v" {
			t.Fatalf("acknowledged write %d lost across close: %q %v", i, v, err)
		}
	}
}

func BenchmarkPutConcurrent(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "s.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(8)
	var n sync.Mutex
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Lock()
			i++
			k := fmt.Sprint("k", i)
			n.Unlock()
			if err := s.PutMeta(k, []byte("v")); err != nil {
				b.Fatal(err)
			}
		}
	})
}
