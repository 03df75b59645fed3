package memfd

const sysMemfdCreate = 319
