module github.com/ofsdn/ofsdn/test/compat/libcni-v1.1

go 1.22

require github.com/containernetworking/cni v1.1.2
