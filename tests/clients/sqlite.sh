#!/usr/bin/env bash
# Real client: the sqlite3 shell running a scripted workload (tables, bulk
# inserts, indexes, joins, aggregates, updates, deletes, vacuum, integrity
# check) on a fresh database file, with and without the allocator preloaded;
# the query results are compared byte for byte.
#   sqlite.sh [ROWS]   (default 200000)
. "$(dirname "$0")/common.sh"
need sqlite3
rows=${1:-200000}
cd "$WORK"
cat >workload.sql <<SQL
.bail on
.mode list
PRAGMA cache_size = -65536;
PRAGMA temp_store = memory;
PRAGMA journal_mode = wal;
CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, city TEXT, note BLOB);
CREATE TABLE orders(id INTEGER PRIMARY KEY, cust INTEGER, amount INTEGER, item TEXT);
CREATE TABLE item(code TEXT PRIMARY KEY, price INTEGER, descr TEXT) WITHOUT ROWID;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows / 10)
INSERT INTO customer SELECT i, 'cust' || i, 'city' || (i * 7 % 97),
  zeroblob(i % 700) FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
INSERT INTO item SELECT printf('it%05d', i), (i * 37) % 1000 + 1,
  substr(hex(randomblob(0)) || replace(printf('%.*c', i % 400, 'd'), 'd', 'descr '), 1, 2000) FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows)
INSERT INTO orders SELECT i, (i * 7919) % ($rows / 10) + 1, (i * 31) % 1000,
  printf('it%05d', (i * 13) % 5000 + 1) FROM n;
COMMIT;
CREATE INDEX orders_cust ON orders(cust);
CREATE INDEX orders_item_amount ON orders(item, amount);
CREATE INDEX customer_city ON customer(city, name);
SELECT 'counts', (SELECT count(*) FROM customer), (SELECT count(*) FROM orders), (SELECT count(*) FROM item);
SELECT 'top', c.city, count(*), sum(o.amount * i.price)
  FROM orders o JOIN customer c ON c.id = o.cust JOIN item i ON i.code = o.item
  GROUP BY c.city ORDER BY 4 DESC, 2 LIMIT 10;
SELECT 'best', c.name, sum(o.amount) AS s FROM customer c JOIN orders o ON o.cust = c.id
  GROUP BY c.id ORDER BY s DESC, c.id LIMIT 5;
SELECT 'items', count(DISTINCT item), max(length(descr)), sum(length(descr)) FROM orders JOIN item ON code = item;
SELECT 'window', cust, amount, rank() OVER (PARTITION BY cust ORDER BY amount DESC, id)
  FROM orders WHERE cust < 4 ORDER BY cust, 4 LIMIT 12;
UPDATE orders SET amount = amount + 1, item = printf('it%05d', (id * 17) % 5000 + 1) WHERE id % 3 = 0;
DELETE FROM orders WHERE amount % 5 = 0;
DELETE FROM customer WHERE id % 11 = 0;
UPDATE customer SET note = zeroblob(3000 + id % 5000) WHERE id % 13 = 0;
SELECT 'after', count(*), sum(amount), total(length(item)) FROM orders;
SELECT 'orphans', count(*) FROM orders WHERE cust NOT IN (SELECT id FROM customer);
SELECT 'group', group_concat(name, ',') FROM (SELECT name FROM customer WHERE city = 'city5' ORDER BY name LIMIT 50);
CREATE TEMP TABLE t AS SELECT cust, item, sum(amount) AS s FROM orders GROUP BY cust, item;
SELECT 'temp', count(*), sum(s), max(s) FROM t;
DROP TABLE t;
PRAGMA wal_checkpoint(TRUNCATE);
VACUUM;
SELECT 'hash', sum(length(name) * id) % 1000000007, sum(length(note)) FROM customer;
PRAGMA integrity_check;
SQL
for m in ref lib; do
  mkdir -p $m
  (cd $m && run_one $m sqlite sqlite3 db.sqlite -init /dev/null -batch <"$WORK/workload.sql") ||
    die "sqlite3 run ($m) failed"
done
grep -qx 'ok' lib/../sqlite.lib.out || die "integrity_check did not report ok"
same "$WORK/sqlite.ref.out" "$WORK/sqlite.lib.out" "sqlite3 query results"
say "PASS"
