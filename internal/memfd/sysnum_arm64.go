package memfd

const sysMemfdCreate = 279
