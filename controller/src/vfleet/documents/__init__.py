"""The typed documents vfleet reads and writes, and the one way each is read.

Every file or flag an operator hands vfleet passes through here before anything else sees
it: `files` reads bytes safely and parses YAML or JSON strictly (duplicate keys, alias
bombs, binary files refused; every key's line kept); the pydantic models check types and
values; `validate` turns the first problem into one UserError line naming the file, the
line, the field and what to write instead. The CLI turns that line into exit code 2.
"""
