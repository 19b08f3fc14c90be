//! Watch-backed caches of whole kinds, whose watch task is owned: it stops when the
//! owner drops its [`Watching`] handle, so a cache opened in a leadership term never
//! outlives the term.

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

/// A background task that is aborted when this handle is dropped.
#[derive(Debug)]
pub struct Watching(JoinHandle<()>);

impl Watching {
    pub fn spawn(fut: impl Future<Output = ()> + Send + 'static) -> Watching {
        Watching(tokio::spawn(fut))
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A cache of every object of a kind (all namespaces), kept current by a watch, loaded
/// before it is returned. Managed fields are dropped: nothing reads them.
pub async fn mirror<K>(client: &kube::Client) -> anyhow::Result<(Store<K>, Watching)>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = watcher(
        kube::Api::<K>::all(client.clone()),
        watcher::Config::default(),
    )
    .backoff(super::watch::backoff())
    .modify(|o| o.meta_mut().managed_fields = None)
    .reflect(writer)
    .for_each(|_| futures::future::ready(()));
    let task = Watching::spawn(stream);
    store.wait_until_ready().await?;
    Ok((store, task))
}
