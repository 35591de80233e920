// Command etcd is etcd's server, built from go.etcd.io/etcd/server/v3 at the version go.mod
// pins (etcd's own main module is not published on the proxy; its main only calls etcdmain).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
