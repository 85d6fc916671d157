module github.com/ofsdn/ofsdn/test/compat/libcni-v1.2

go 1.22

require github.com/containernetworking/cni v1.2.3
