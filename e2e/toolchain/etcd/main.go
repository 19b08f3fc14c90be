// Command etcd is etcd's own server main, built from the Go module registry because
// go.etcd.io/etcd/server/v3 cannot be `go install`ed (its monorepo uses replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
