//! Tests of `procedure`: the context's checks, rollback, dry runs, integer ops, scans and
//! borrowed reads.

use super::*;
use luigi_store::table_key;

/// A procedure that runs a closure (also the snapshot view's tests').
pub(crate) struct Scripted(pub(crate) fn(&mut dyn ProcCtx) -> Result<Vec<u8>, ProcError>);
impl Procedure for Scripted {
    fn execute(&self, ctx: &mut dyn ProcCtx, _args: &[u8]) -> Result<Vec<u8>, ProcError> {
        (self.0)(ctx)
    }
}

fn registry(f: fn(&mut dyn ProcCtx) -> Result<Vec<u8>, ProcError>) -> Registry {
    let mut r = Registry::new();
    r.register("p", Arc::new(Scripted(f)));
    r
}

#[test]
fn unknown_procedure_is_an_error() {
    let r = Registry::new();
    let err = r.execute("nope", &[], &mut Store::new(), &KeySet::default(), 0).unwrap_err();
    assert_eq!(err, ProcError::UnknownProcedure("nope".into()));
}

#[test]
fn undeclared_and_read_only_keys_are_refused() {
    let keys = KeySet::new(vec![b"r".to_vec()], vec![b"w".to_vec()]);
    let r = registry(|ctx| ctx.put(b"r".to_vec(), vec![1]).map(|_| vec![]));
    let err = r.execute("p", &[], &mut Store::new(), &keys, 3).unwrap_err();
    assert!(matches!(err, ProcError::KeyNotDeclared { access: Access::Write, shard: 3, .. }));
    let r = registry(|ctx| ctx.get(b"x").map(|_| vec![]));
    assert!(r.execute("p", &[], &mut Store::new(), &keys, 0).is_err());
}

/// `get_with` lends what `get` returns (present, absent, after a write in the same
/// transaction) and refuses what `get` refuses.
#[test]
fn a_borrowed_read_sees_what_a_read_sees_and_is_refused_where_it_is() {
    let keys = KeySet::new(vec![b"r".to_vec(), b"z".to_vec()], vec![b"w".to_vec()]);
    let mut store = Store::new();
    store.put(b"r".to_vec(), vec![7, 8]);
    let r = registry(|ctx| {
        let mut seen = Vec::new();
        for key in [&b"r"[..], b"z", b"w"] {
            let owned = ctx.get(key)?;
            ctx.get_with(key, &mut |v| seen.push(v.map(<[u8]>::to_vec)))?;
            assert_eq!(seen.last(), Some(&owned), "{key:?}");
        }
        ctx.put(b"w".to_vec(), vec![9])?;
        ctx.get_with(b"w", &mut |v| seen.push(v.map(<[u8]>::to_vec)))?;
        assert_eq!(seen, vec![Some(vec![7, 8]), None, None, Some(vec![9])]);
        assert_eq!(ctx.get_i64(b"z")?, 0);
        ctx.get_with(b"x", &mut |_| unreachable!("an undeclared key is refused first")).map(|()| vec![])
    });
    let err = r.execute("p", &[], &mut store, &keys, 2).unwrap_err();
    assert!(matches!(err, ProcError::KeyNotDeclared { access: Access::Read, shard: 2, .. }), "{err:?}");
}

#[test]
fn failure_rolls_back_every_write() {
    let keys = KeySet::new(vec![], vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    let mut store = Store::new();
    store.put(b"a".to_vec(), b"old".to_vec());
    store.put(b"c".to_vec(), b"gone?".to_vec());
    let before = store.clone();
    let r = registry(|ctx| {
        ctx.put(b"a".to_vec(), b"new".to_vec())?;
        ctx.insert(b"b".to_vec(), b"ins".to_vec())?;
        ctx.delete(b"c")?;
        ctx.add_i64(b"b", 1)?; // "ins" is not an integer: fails after three writes
        Ok(vec![])
    });
    let err = r.execute("p", &[], &mut store, &keys, 0).unwrap_err();
    assert_eq!(err, ProcError::NotAnInteger(b"b".to_vec()));
    assert_eq!(store, before);
}

#[test]
fn a_dry_run_returns_what_execution_returns_and_leaves_the_store_as_it_was() {
    let keys = KeySet::new(vec![], vec![b"n".to_vec(), b"s".to_vec()]);
    let mut store = Store::new();
    store.put(b"n".to_vec(), 4i64.to_le_bytes().to_vec());
    let before = store.clone();
    let r = registry(|ctx| {
        let n = ctx.add_i64(b"n", 3)?;
        ctx.insert(b"s".to_vec(), b"x".to_vec())?;
        Ok(n.to_string().into_bytes())
    });
    assert_eq!(r.dry_run("p", &[], &mut store, &keys, 0), Ok(b"7".to_vec()));
    assert_eq!(store, before, "nothing written");
    assert_eq!(r.execute("p", &[], &mut store, &keys, 0), Ok(b"7".to_vec()), "the same answer");
    assert_ne!(store, before);
}

#[test]
fn integer_ops_insert_and_conditional_update() {
    let keys = KeySet::new(vec![], vec![b"n".to_vec(), b"s".to_vec()]);
    let mut store = Store::new();
    let r = registry(|ctx| {
        assert_eq!(ctx.add_i64(b"n", 5)?, 5);
        assert_eq!(ctx.add_i64(b"n", -7)?, -2);
        ctx.insert(b"s".to_vec(), b"x".to_vec())?;
        assert!(matches!(ctx.insert(b"s".to_vec(), b"y".to_vec()), Err(ProcError::DuplicateKey(_))));
        assert!(!ctx.update_if(b"s", Some(b"nope"), b"z".to_vec())?);
        assert!(ctx.update_if(b"s", Some(b"x"), b"z".to_vec())?);
        Ok(ctx.get(b"s")?.unwrap())
    });
    assert_eq!(r.execute("p", &[], &mut store, &keys, 0).unwrap(), b"z".to_vec());
    assert_eq!(store.get(b"n").unwrap(), &(-2i64).to_le_bytes().to_vec());
}

#[test]
fn scans_need_a_declared_prefix_covering_the_range() {
    let prefix = table_key(7, &[1]);
    let keys = KeySet::new(vec![prefix.clone()], vec![]);
    let mut store = Store::new();
    for i in 0..5 {
        store.put(table_key(7, &[1, i]), vec![i as u8]);
        store.put(table_key(7, &[2, i]), vec![i as u8]);
    }
    let mut ctx = TxnCtx::new(&mut store, &keys, 0);
    let end = prefix_successor(&prefix).unwrap();
    let last = ctx.scan(&prefix, &end, 1, ScanOrder::Descending).unwrap();
    assert_eq!(last[0].0, table_key(7, &[1, 4]));
    assert_eq!(ctx.scan(&table_key(7, &[1, 1]), &table_key(7, &[1, 3]), 9, ScanOrder::Ascending).unwrap().len(), 2);
    assert!(ctx.scan(&prefix, &table_key(7, &[3]), 9, ScanOrder::Ascending).is_err());
    assert!(ctx.get(&table_key(7, &[1, 2])).unwrap().is_some());
    assert!(ctx.get(&table_key(7, &[2, 2])).is_err());
    let _ = &mut ctx;
}

#[test]
fn writes_are_listed_once_with_their_final_values_and_can_be_undone() {
    let keys = KeySet::new(vec![], vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    let mut store = Store::new();
    store.put(b"c".to_vec(), b"old".to_vec());
    let before = store.clone();
    let mut ctx = TxnCtx::new(&mut store, &keys, 0);
    ctx.put(b"b".to_vec(), b"1".to_vec()).unwrap();
    ctx.put(b"a".to_vec(), b"2".to_vec()).unwrap();
    ctx.put(b"b".to_vec(), b"3".to_vec()).unwrap();
    ctx.delete(b"c").unwrap();
    let writes = ctx.writes();
    assert_eq!(
        writes,
        vec![(b"b".to_vec(), Some(b"3".to_vec())), (b"a".to_vec(), Some(b"2".to_vec())), (b"c".to_vec(), None)]
    );
    ctx.rollback();
    assert_eq!(store, before);
}

#[test]
fn prefix_successor_carries() {
    assert_eq!(prefix_successor(&[1, 2]), Some(vec![1, 3]));
    assert_eq!(prefix_successor(&[1, 255]), Some(vec![2]));
    assert_eq!(prefix_successor(&[255, 255]), None);
}
